"""Regenerate the simulated bus fixtures listed in fixtures/cases.toml, with golden outputs.

    python -m scsitrace.fixtures [--check] [CASE ...]     (run from the repository root)

For each case: the trace (`scsitrace simulate -o ... <simulate args>`), `summary.json` (what
`scsitrace analyze --json` writes), `phases.txt` (the terminal tables, 100 columns, no colour)
and `baseline.json` (`scsitrace baseline`). With --check nothing is written: every output is
rebuilt in memory and compared, and the differing files are listed (exit 1).
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = Path("fixtures") / "cases.toml"
OUT = Path("fixtures") / "bus"


def load_cases(root: Path = ROOT) -> list[dict]:
    with open(root / MANIFEST, "rb") as fh:
        cases = tomllib.load(fh)["case"]
    names = [c["name"] for c in cases]
    if len(set(names)) != len(names):
        raise SystemExit(f"{MANIFEST}: duplicate case names")
    return cases


def trace_name(case: dict) -> str:
    args = case["simulate"]
    fmt = args[args.index("--format") + 1] if "--format" in args else "ancot"
    return f"trace.{fmt}"


def build_case(case: dict, workdir: Path) -> dict[str, bytes]:
    """All outputs of one case, built under `workdir` (relative paths, run from the root)."""
    from scsitrace.cli import main
    rel = OUT / case["name"] / trace_name(case)
    trace = workdir / rel
    trace.parent.mkdir(parents=True, exist_ok=True)
    _run(main, ["simulate", "-o", str(trace)] + case["simulate"])
    outputs = {trace_name(case): trace.read_bytes()}
    outputs.update(golden_outputs(trace, rel, case["analyze"]))
    base = trace.parent / "baseline.json"      # regress finds the trace next to its baseline
    _run(main, ["baseline", str(trace), "-o", str(base)] + case["analyze"])
    outputs["baseline.json"] = base.read_bytes()
    return outputs


def golden_outputs(trace: Path, rel: Path, analyze_args: list[str]) -> dict[str, bytes]:
    """summary.json and phases.txt of a trace, showing it under the relative path `rel`."""
    from rich.console import Console

    from scsitrace.cli import build_parser
    from scsitrace.commands import analyze as analyze_cmd
    from scsitrace.reports import summary as summ
    from scsitrace.reports import terminal
    args = build_parser().parse_args(["analyze", str(trace)] + analyze_args)
    analysis = analyze_cmd.load(args)
    analysis.capture.path = str(rel)
    analysis.source["path"] = str(rel)
    s = summ.summary(analysis, args.profile, args.target, args.io_size)
    text = io.StringIO()
    terminal.render(s, Console(file=text, width=100, color_system=None, force_terminal=False,
                               legacy_windows=False))
    return {"summary.json": (json.dumps(s, indent=1) + "\n").encode(),
            "phases.txt": text.getvalue().encode()}


def _run(main, argv: list[str]) -> None:
    err = io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = err
    try:
        status = main(argv)
    finally:
        sys.stdout, sys.stderr = old
    if status != 0:
        raise SystemExit(f"scsitrace {' '.join(argv)}: exit {status}: {err.getvalue().strip()}")


def regenerate(names: list[str] | None = None, check: bool = False, root: Path = ROOT) -> list[str]:
    """Write (or compare) every case; returns the files that differ from what is committed."""
    cases = [c for c in load_cases(root) if not names or c["name"] in names]
    unknown = set(names or ()) - {c["name"] for c in cases}
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(sorted(unknown))}")
    differ = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            outputs = build_case(case, Path(tmp))
            folder = root / OUT / case["name"]
            for name, data in outputs.items():
                path = folder / name
                if not path.exists() or path.read_bytes() != data:
                    differ.append(str(path.relative_to(root)))
                    if not check:
                        folder.mkdir(parents=True, exist_ok=True)
                        path.write_bytes(data)
    return differ


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scsitrace.fixtures", description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", metavar="CASE")
    p.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = p.parse_args(argv)
    import os
    os.chdir(ROOT)
    differ = regenerate(args.cases, check=args.check)
    verb = "differ" if args.check else "rewritten"
    print(f"{len(differ)} file(s) {verb}" + "".join(f"\n  {d}" for d in differ))
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
