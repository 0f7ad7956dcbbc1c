"""Differential check for refactors: run the CLI over every trace of the fixtures and of
../shared/realdata (strict and lenient, with the filters each layer takes) and keep every
output (stdout, stderr, exit status, JSON, per-I/O CSV, category CSV) in a folder. Run it
before and after a change, then compare the two folders:

    python bench/diffcheck.py run /tmp/before
    ... change ...
    python bench/diffcheck.py run /tmp/after
    python bench/diffcheck.py compare /tmp/before /tmp/after
    python bench/diffcheck.py figures /tmp/before /tmp/after

`compare` lists every file that differs in any byte; `figures` compares the figures only
(exit status, elapsed time, I/Os, bytes, bandwidth, IOPS, each category's percent, each
latency row's count, mean and percentiles, each anomaly kind's count): keys added by one
side (new tables, new columns, notes, words) are not differences, a figure that changed is,
and each figure that changed is listed with the cases it changed in.

Runs in one process (cli.main per case), so a few hundred cases take a minute or two.
Outputs that name a temporary path are compared with the path replaced.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "realdata"
SKIP_SUFFIXES = (".json", ".toml", ".sh", ".py", ".md", ".csv", ".parquet")
SKIP_NAMES = ("ref.", "provenance", "workload", "blktrace-stdout", "dd.txt", "ftrace-stats", "phases.txt",
              "lsscsi", "README")


def traces() -> list[Path]:
    out = []
    for top in (ROOT / "fixtures", SHARED):
        if not top.exists():
            continue
        for path in sorted(top.rglob("*")):
            if not path.is_file() or path.suffix in SKIP_SUFFIXES or any(s in path.name for s in SKIP_NAMES):
                continue
            if path.name.endswith(".blktrace.1"):       # the set is read through its .0 file
                continue
            out.append(path.relative_to(ROOT) if top == ROOT / "fixtures" else Path("..") / path.relative_to(ROOT.parent))
    return out


def cases(path: Path) -> list[list[str]]:
    """Command lines for one trace: plain, lenient, and the options its layer takes."""
    p = str(path)
    base = [["analyze", p], ["analyze", p, "--lenient"], ["analyze", p, "--profile", "scsi"],
            ["analyze", p, "--target", "0"], ["analyze", p, "--device", "8,0"],
            ["analyze", p, "--window", "0.001:0.5"], ["analyze", p, "--io-size", "4096"]]
    if "blktrace" in path.name or "blk" in path.name:
        base += [["analyze", p, "--pid", "1"], ["analyze", p, "--device", "8,16", "--lenient"]]
    if path.suffix in (".ancot", ".vcd"):
        base += [["attribute", p], ["analyze", p, "--settle-ns", "0"], ["analyze", p, "--data-polarity", "low"]]
    return base


def run_case(argv: list[str], out: Path, tag: str) -> None:
    from scsitrace import cli
    js, ios, cats = out / f"{tag}.json", out / f"{tag}.ios.csv", out / f"{tag}.cat.csv"
    extra = ["--json", str(js), "--ios", str(ios), "--csv", str(cats)] if argv[0] == "analyze" else []
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            status = cli.main(argv + extra)
        except SystemExit as exc:
            status = exc.code
    text = f"argv: {argv}\nexit: {status}\n--- stdout\n{stdout.getvalue()}--- stderr\n{stderr.getvalue()}"
    (out / f"{tag}.txt").write_text(text.replace(str(out), "<OUT>"))


def run(out: Path) -> None:
    os.environ["COLUMNS"] = "160"
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(ROOT)                  # relative trace paths: outputs equal whichever checkout runs
    n = 0
    for path in traces():
        for argv in cases(path):
            tag = hashlib.sha1(" ".join(argv).encode()).hexdigest()[:12]
            run_case(argv, out, tag)
            n += 1
    print(f"{n} cases in {out}")


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    bad = 0
    for name in names:
        pa, pb = a / name, b / name
        da = pa.read_bytes() if pa.exists() else None
        db = pb.read_bytes() if pb.exists() else None
        if da != db:
            bad += 1
            head = (a / (name.split(".")[0] + ".txt")).read_text().splitlines()[0]
            print(f"DIFF {name}  ({head})")
    print(f"{len(names)} files compared, {bad} differ")
    return 1 if bad else 0


FIGURES = ("elapsed_ns", "ios_completed", "data_bytes", "bandwidth_mib_s", "iops")


def figures_of(case: Path) -> dict:
    """The figures of one case: its exit status and, for analyze, its JSON's figures."""
    text = case.read_text()
    out = {"exit": text.splitlines()[1]}
    js = case.with_suffix(".json")
    if js.exists() and js.stat().st_size:
        d = json.loads(js.read_text())
        out.update({k: d.get(k) for k in FIGURES})
        out.update({f"percent.{c['name']}": round(c["percent"], 6) for c in d.get("categories") or []})
        for row in d.get("latency") or []:
            for k in ("n", "avg_ns", "p50_ns", "p90_ns", "p99_ns"):
                if k in row:
                    out[f"latency.{row.get('name')}.{k}"] = row[k]
        anomalies = d.get("anomalies")
        if isinstance(anomalies, dict):
            out.update({f"anomalies.{k}": n for k, n in (anomalies.get("by_kind") or {}).items()})
    return out


def _close(x, y) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        return x is not None and y is not None and abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))
    return x == y


def compare_figures(a: Path, b: Path) -> int:
    changed: dict[str, list[str]] = {}
    cases = sorted(p.name for p in a.glob("*.txt") if (b / p.name).exists())
    for name in cases:
        fa, fb = figures_of(a / name), figures_of(b / name)
        argv = (a / name).read_text().splitlines()[0][len("argv: "):]
        for key in sorted(set(fa) & set(fb)):
            if not _close(fa[key], fb[key]):
                changed.setdefault(key, []).append(f"{argv}: {fa[key]} -> {fb[key]}")
    for key, where in sorted(changed.items(), key=lambda kv: -len(kv[1])):
        print(f"{key}: {len(where)} cases, e.g. {where[0]}")
    print(f"{len(cases)} cases compared, {len(changed)} figures changed")
    return 1 if changed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        run(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    elif len(sys.argv) == 4 and sys.argv[1] == "figures":
        sys.exit(compare_figures(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        print(__doc__)
        sys.exit(2)
