"""Differential check for refactors: run the CLI over every trace of the fixtures and of
../shared/realdata (strict and lenient, with the filters each layer takes) and keep every
output (stdout, stderr, exit status, JSON, per-I/O CSV, category CSV) in a folder. Run it
before and after a change, then compare the two folders:

    python bench/diffcheck.py run /tmp/before
    ... change ...
    python bench/diffcheck.py run /tmp/after
    python bench/diffcheck.py compare /tmp/before /tmp/after

Runs in one process (cli.main per case), so a few hundred cases take a minute or two.
Outputs that name a temporary path are compared with the path replaced.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
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


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        run(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        print(__doc__)
        sys.exit(2)
